"""Run the offbench command line from a checkout: `python cli.py --help`."""

from offbench.cli import main

if __name__ == "__main__":
    main()
