from gradviz.cli.main import main

raise SystemExit(main())
