import sys

from nbtools.cli.main import main

sys.exit(main())
