import sys

if sys.argv[1:2] == ["warm-up"]:  # python -m prefixsim warm-up: compile the kernels ahead
    from .warm_up import main as warm_up

    sys.exit(warm_up(sys.argv[2:]))

from .cli import main

sys.exit(main())
