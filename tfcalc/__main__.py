"""`python -m tfcalc` runs the command line."""

from tfcalc.cli.app import main

main()
