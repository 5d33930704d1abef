from five_actors.cli import main

raise SystemExit(main())
