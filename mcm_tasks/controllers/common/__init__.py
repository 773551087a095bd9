"""What every controller shares: the reads (``context_io``), the scope of a pass and the registration that
builds it (``scope``, ``registration``), the fold of a pass's phases (``phases``), the Machine status
(``status`` decides, ``status_io`` writes), owner references and the claim (``owners``,
``claim_io``), Events (``events``), the freeze flag (``frozen_io``), template comparison
(``template``), rollout budgets (``rollout``) and metric vocabulary (``metrics``). A module whose name
ends in ``_io`` acts (the API servers, Redis); the others decide, or are the shared edges named for
what they hold. A controller imports this package and never a sibling controller (enforced by
import-linter in ``make lint``)."""
