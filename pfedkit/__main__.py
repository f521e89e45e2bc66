from pfedkit.cli import main

main()
