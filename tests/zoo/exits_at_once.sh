#!/bin/sh
# The zoo: a start script that launches the server in the background and returns, so the
# process ck started exits 0 at once (the server it launched never runs: here it is not even
# started).
echo "starting the server"
exit 0
