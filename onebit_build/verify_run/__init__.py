"""Verification runs: one command that says whether a new build is as good as the working one.

``onebit-build [--recipe R | --hrx on] verify-run --working PATH`` compares the recipe's new
build with a working build in one run, in five parts, and gives one verdict:

- :mod:`.working`: what ``--working PATH`` names (a build folder, its llama-server, a run
  folder with a manifest), refused in one line otherwise;
- artifacts: every kernel artifact, new vs working, N/N identical (``checking.compare``);
- :mod:`.answers`: the same greedy text from both builds, the first differing token when not;
- :mod:`.speed`: interleaved rounds, the ratio new/working with its signed-rank interval, and the
  definition of "on par", "faster", "slower" and "too noisy";
- :mod:`.provenance`: the files each live server mapped are its build's own;
- :mod:`.numerics_stage`: the evaluation text scored by both builds, new against working;
- :mod:`.verdict`: VERIFIED (exit 0) only when all five hold, else NOT VERIFIED (exit 11);
- :mod:`.report`: ``verification.md``, ``verification.json`` and ``verification.tar.gz``,
  written atomically; ``running.junit``: the checks as JUnit XML.
"""
