"""What every command runs in; docs/layout.md lists the modules."""
