"""What the unit and integration tests share: the model zoo, the served test repository, server checks."""
