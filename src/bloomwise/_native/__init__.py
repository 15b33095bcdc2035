"""The compiled core (Cython). Private: use the classes in bloomwise instead."""
