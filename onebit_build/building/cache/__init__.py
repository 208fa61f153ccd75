"""Caches that make a build's compiles reusable across build folders, workspaces and machines:
the compiler cache for C, C++, CUDA and HIP (``compiler``: which launcher, its settings and path
maps; ``session``: its server and statistics for one build; ``redis_guard``: the stand-in in
front of a shared Redis) and the shader cache for glslc (``shaders``: set up for one build;
``glslc``: the launcher itself, which runs inside the build)."""
