"""What ``spark-submit`` runs for ``--print-submit``: the dedupectl CLI, inside the submitted application.

``spark-submit --master spark://… --jars … dedupectl/spark/submit.py audit -t events -o events-deduped``
runs ``dedupectl audit -t events -o events-deduped`` with the session spark-submit configured.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __name__ == "__main__":
    # Python put this file's folder first on sys.path; dedupectl is imported as a package, not from here
    here = str(Path(__file__).resolve().parent)
    sys.path[:] = [entry for entry in sys.path if str(Path(entry or ".").resolve()) != here]
    from dedupectl.cli.app import main

    sys.argv[0] = "dedupectl"
    main()
