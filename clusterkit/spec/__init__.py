"""The spec a person writes: its typed model, the YAML reader that keeps every value's file:line, the
errors and warning ids every later stage reports with, and the AWS names derived from the cluster name.

Nothing here knows a rule, a default or a file layout beyond the spec itself, so every other package can
import it.

May import: (nothing else in clusterkit)
"""
