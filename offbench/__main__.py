from offbench.cli import main

main()
