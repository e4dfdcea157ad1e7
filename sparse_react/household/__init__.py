"""The household: the game engine and its caches, the game files and catalogue, generated games, the
planner the experts consult, and the Gymnasium environment over them."""
