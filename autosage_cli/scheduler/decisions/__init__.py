"""What the tuner decides and keeps: the guardrail decision (select), decisions per kind of graph
(kinds), the additive score's schedule (additive), decisions to plans (plans), and replay."""
