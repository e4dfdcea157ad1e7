"""sparse_react: ReAct agents with a choice of thought rhythm on ALFWorld-style household games.

>>> import sparse_react as sr
>>> results = sr.evaluate(sr.load_policy("expert"), games="valid_unseen", rhythms=["sparse", "act"], limit=2,
...                       progress=False)
>>> results.success("sparse")
1.0

Importing the package loads no model library: torch comes in when a model policy is loaded.
"""

from importlib import metadata

__version__ = metadata.version("sparse_react")

from sparse_react.agent import Context, Decision, LoopRules, Policy, run_episode
from sparse_react.api import Results, evaluate, evaluate_with, find_games, load_policy, load_policy_from, make_env
from sparse_react.errors import UserError
from sparse_react.household.catalog import GameRef
from sparse_react.household.env import (
    ENV_ID,
    REACT_ENV_ID,
    Budget,
    HouseholdEnv,
    StepBudget,
    ThinkWrapper,
    register_envs,
)
from sparse_react.household.tasks import TaskType
from sparse_react.options import ModelOptions
from sparse_react.rhythms import RHYTHMS
from sparse_react.training.recipe import RecipeSettings, train_agent
from sparse_react.trajectory import Episode, Failure, read_episodes, read_records

register_envs()
train = train_agent  # `sparse_react.train(RecipeSettings(...), out)`: what `sparse-react train` does

__all__ = [
    "find_games", "load_policy", "make_env", "run_episode", "evaluate", "Results", "read_episodes", "read_records",
    "ModelOptions", "load_policy_from", "evaluate_with", "RecipeSettings", "train_agent", "train",
    "Policy", "Context", "Decision", "LoopRules", "Budget", "Episode", "Failure", "GameRef", "TaskType", "RHYTHMS",
    "HouseholdEnv", "ThinkWrapper", "StepBudget", "ENV_ID", "REACT_ENV_ID", "register_envs", "UserError",
    "__version__",
]
