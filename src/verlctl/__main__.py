from verlctl.cli import main

main()
