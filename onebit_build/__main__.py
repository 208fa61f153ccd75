from onebit_build.cli import entry

entry()
