import subprocess
import sys

subprocess.run([sys.executable, "-c", "import math\nmath.sqrt(-1)"], check=True)
