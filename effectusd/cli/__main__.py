from effectusd.cli import main

main()
