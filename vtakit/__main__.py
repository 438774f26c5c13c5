from vtakit.cli import main

raise SystemExit(main())
