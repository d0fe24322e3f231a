"""fio job sets run on pvfs and its peers."""
