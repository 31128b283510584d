"""What a train step minimizes: a loss, wrapped by each technique."""
