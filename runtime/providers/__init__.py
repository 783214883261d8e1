"""Where nodes come from (one module per provider) and the clouds' interruption notices."""
