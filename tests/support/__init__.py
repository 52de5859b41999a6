"""What several test modules share: the paths of the checkout, the browser and JupyterLab a
test worker shares, the steps labs run, synthetic runs, simulated hosts. tests/ is on
sys.path (its conftest.py puts it there), so a test imports ``support.<module>``; nothing
here is collected as a test."""
