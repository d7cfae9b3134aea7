import sys
import warnings

# google-api-core warns on import that Python 3.11 nears end of life: noise, not a defect.
warnings.filterwarnings("ignore", category=FutureWarning, module="google.api_core")

from bench.harness import main  # noqa: E402

sys.exit(main())
