# The private signing keys of scripts/oauth-server: a JWKS, each key with a kid and an alg.
node -e 'const {generateKeyPairSync} = require("node:crypto");
const {privateKey} = generateKeyPairSync("rsa", {modulusLength: 2048});
const key = Object.assign(privateKey.export({format: "jwk"}), {kid: "k1", alg: "RS256", use: "sig"});
process.stdout.write(JSON.stringify({keys: [key]}));' > keys.json
chmod 600 keys.json
node scripts/oauth-server/server.mjs --keys keys.json \
    --resource http://127.0.0.1:8765/mcp --port 8766
