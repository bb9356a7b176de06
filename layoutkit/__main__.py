from layoutkit.tools.cli import main

raise SystemExit(main())
