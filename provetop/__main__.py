from provetop.cli import main

raise SystemExit(main())
