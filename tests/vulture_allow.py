"""Names the dead-code check (tests/test_dead_code.py) cannot see being used, each with why.
Read by vulture as code; never imported."""

# The command table names each command's function and option adder as a string
# ("module:function", commands/__init__.py), called through importlib.
from onebit_build.commands import arguments, info, life, tools
from onebit_build.running import bench, server

arguments.run_folder, arguments.run_folder_junit, arguments.gc, arguments.completion
info.doctor, info.completion, life.gc, life.model_pull, tools.pins_lock, tools.patches_export
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
