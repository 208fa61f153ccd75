"""The job: what one invocation works on (:mod:`.model`), and its stages in order —
:mod:`.build` (fetch, patch, build, manifest), :mod:`.verify`, :mod:`.smoke` — run up to one
of them by :mod:`.run`. Commands (``onebit_build.commands``) open a job and run it."""
