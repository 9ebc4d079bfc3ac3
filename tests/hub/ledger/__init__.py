"""Tests of the GPU ledger (spawner/gpuhub/hub/ledger): the device book, the wait line, the
capacity watch, the files the hub keeps."""
