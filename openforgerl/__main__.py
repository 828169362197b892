from openforgerl.cli import main

main()
