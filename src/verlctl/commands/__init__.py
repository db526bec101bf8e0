"""One module per CLI command. Each imports only typer/stdlib at module level."""
