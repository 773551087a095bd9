"""What every controller shares: the reads (``context``), the scope of a pass and the registration that
builds it (``scope``, ``registration``), the Machine status writer (``status``),
owner references and the claim (``owners``, ``claim``), Events (``events``), the freeze flag
(``frozen``), template comparison (``template``), rollout budgets (``rollout``) and metric
vocabulary (``metrics``). A controller imports this package and never a sibling controller
(enforced by import-linter in ``make lint``)."""
