"""The command line: ``gradviz [SCRIPT]`` opens the app; sub-commands work headless."""
