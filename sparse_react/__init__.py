"""sparse_react: ReAct agents with a choice of thought rhythm on ALFWorld-style household games."""

from importlib import metadata

__version__ = metadata.version("sparse_react")

from sparse_react.env import ENV_ID, REACT_ENV_ID, HouseholdEnv, ThinkWrapper, register_envs

register_envs()

__all__ = ["ENV_ID", "REACT_ENV_ID", "HouseholdEnv", "ThinkWrapper", "register_envs", "__version__"]
