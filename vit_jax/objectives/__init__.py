"""What a train step minimizes: a loss, and the techniques that wrap it."""
