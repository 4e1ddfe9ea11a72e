"""Suite-wide setup: no test may reach AWS or the internet, whatever the machine's environment holds."""
import os
import subprocess

for key in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN"):
    os.environ.pop(key, None)
os.environ.update({
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_EC2_METADATA_DISABLED": "true",
    # jsii silences its end-of-life banner only when this names the running node major version.
    "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": subprocess.run(
        ["node", "-p", "process.versions.node.split('.')[0]"], capture_output=True, text=True).stdout.strip(),
    "JSII_SILENCE_WARNING_UNTESTED_NODE_VERSION": "1",
})
