"""Evidence that travels with a build: the signed in-toto statements (SLSA provenance of a
build, the test result of a verification run), the in-toto link, the CycloneDX SBOM, and
the checks ``verify-provenance`` runs on them anywhere.

``keys`` reads signing and public keys, ``envelope`` signs and opens DSSE envelopes,
``scrub`` keeps the machine's paths out of what is signed, ``debian`` and ``tools`` name the
packages and binaries a build used, ``statement``, ``link``, ``sbom`` and ``verdict`` make
the documents, ``emit`` writes them beside a build, and ``check`` (with ``locate``) judges
them. Nothing here imports the job or the commands."""
