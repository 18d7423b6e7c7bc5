from duplexctl.cli import main

main()
