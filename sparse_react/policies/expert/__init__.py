"""The experts: the planner's or a search's next command, with thoughts in the chosen rhythm's style.

Each is put together from small parts that keep no state between calls (a playing expert
remembers only which lines it wrote itself, `policy.Memory`):

- `task.py`: what the expert knows of a game before its first line (`ExpertTask`);
- `reading.py`: the pure reader, the turns so far as a `Reading` (where the agent is, what it has
  seen where, what it holds) and the subgoals done;
- `knowledge.py`: one state as an expert knows it, and what follows (the thing still wanted,
  where one was seen);
- `search.py`: the search strategies, one per expert (`PlannerSearch`, `OrderedSearch`,
  `HistorySearch`): the next command and the current subgoal;
- `phrases.py`: every sentence the experts write;
- `thoughts.py`: one thought writer per kind of expert thoughts a rhythm declares:
    - sparse: at the start (goal decomposition and where to look), when a subgoal is done and the
      next one is chosen, when the search for an object starts, and after a surprise;
    - dense: before every action (the sparse thought where there is one, otherwise why this action);
    - im: before every action, only the goal decomposition and the current subgoal;
    - act: none;
- `policy.py` and `relabelling.py`: the three policies, and the relabelling expert's `label`.
"""

from sparse_react.policies.expert.policy import ExpertPolicy, SearchingExpertPolicy
from sparse_react.policies.expert.reading import Reading, read
from sparse_react.policies.expert.relabelling import Label, Offered, RelabellingExpertPolicy, false_belief
from sparse_react.policies.expert.task import ExpertError, ExpertTask

__all__ = ["ExpertError", "ExpertPolicy", "ExpertTask", "Label", "Offered", "Reading", "RelabellingExpertPolicy",
           "SearchingExpertPolicy", "false_belief", "read"]
