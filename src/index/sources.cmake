# The prefix index.
