from effectusd.destination.cli import main

main(prog_name="python -m effectusd.destination")
