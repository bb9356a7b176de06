from layoutkit.cli import main

raise SystemExit(main())
