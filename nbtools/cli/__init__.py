"""python -m nbtools: the command line, the tutorials it copies, the kernel spec it installs."""
