from gradviz.cli.supervisor import entry

if __name__ == "__main__":   # not when multiprocessing's spawn re-imports the main module in its workers
    raise SystemExit(entry())
