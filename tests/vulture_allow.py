"""Names the dead-code check (tests/test_dead_code.py) cannot see being used, each with why.
Read by vulture as code; never imported."""

# A command module is found by looking (commands/__init__.py): its COMMAND, run and arguments
# are read by name from the module.
from onebit_build.commands import fetch
from onebit_build.running import bench, server

fetch.COMMAND, fetch.run, fetch.arguments
_ = object()
_.takes_model  # read with getattr by cli.refuse_unused_flags, beside dry_run

# Called by the standard library or a library, not by us.
_.proxies, _.trust_env  # requests.Session settings, set for pip's proxy configuration
_.mtime  # tarfile.TarInfo's field, set for a reproducible bundle
# read by the _json accelerator's scanner from the context it is made with (glslc_json)
_.strict, _.object_hook, _.object_pairs_hook, _.parse_float, _.parse_int, _.parse_constant
server._stop_all  # atexit stops every server left running
bench.__getattr__  # PEP 562: the bench package loads its names when first used
# reprlib.Repr's limits, read by its repr() (core/yamlnode.shown)
_.maxstring, _.maxother, _.maxlist, _.maxdict, _.maxtuple, _.maxset, _.maxlevel
_.tokens_sha256  # a field of the numerical reference's workload, compared through asdict() (running/numerics_ref)
