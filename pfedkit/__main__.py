from pfedkit.cli import program

program()
