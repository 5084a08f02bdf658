import sys

from console.cli.main import main

sys.exit(main())
