"""What every command runs in: its processes and devices, signals and files
(docs/layout.md lists the modules)."""
