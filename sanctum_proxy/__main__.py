from sanctum_proxy.cli import main

raise SystemExit(main())
