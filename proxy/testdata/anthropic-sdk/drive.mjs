// Drives the official Anthropic SDK against the proxy for
// proxy/anthropic_sdk_test.go: `node drive.mjs SCENARIO` with BASE_URL and
// API_KEY set (and MAX_RETRIES, else the SDK's default) prints one JSON
// object: what the SDK returned or raised, and how long the call took.
import Anthropic from '@anthropic-ai/sdk';
import { report } from '../sdkreport.mjs';

const params = {
  model: 'claude-sonnet-4-5',
  max_tokens: 100,
  system: 'Be brief.',
  messages: [{ role: 'user', content: 'Say hello' }],
};

const scenario = process.argv[2];
const client = new Anthropic({
  baseURL: process.env.BASE_URL,
  apiKey: process.env.API_KEY,
  ...(process.env.MAX_RETRIES ? { maxRetries: Number(process.env.MAX_RETRIES) } : {}),
});

// rateLimitHeaders returns the response's *ratelimit* headers as the SDK
// sees them.
function rateLimitHeaders(headers) {
  return Object.fromEntries([...headers].filter(([name]) => name.includes('ratelimit')));
}

async function call() {
  switch (scenario) {
    case 'plain':
    case 'error': {
      const m = await client.messages.create(params);
      return { text: m.content.map((b) => b.text).join(''), usage: m.usage };
    }
    case 'headers': {
      const { data: m, response } = await client.messages.create(params).withResponse();
      return { text: m.content.map((b) => b.text).join(''), usage: m.usage, headers: rateLimitHeaders(response.headers) };
    }
    case 'stream': {
      const stream = client.messages.stream(params);
      let text = '';
      stream.on('text', (t) => { text += t; });
      const m = await stream.finalMessage();
      return { text, usage: m.usage, stopReason: m.stop_reason };
    }
  }
  throw new Error(`unknown scenario ${scenario}`);
}

report(call, (err) => err instanceof Anthropic.APIError && {
  class: err.constructor.name,
  rateLimit: err instanceof Anthropic.RateLimitError,
  status: err.status,
  type: err.error?.error?.type,
  message: err.error?.error?.message,
  retryAfter: err.headers?.get('retry-after') ?? null,
  shouldRetry: err.headers?.get('x-should-retry') ?? null,
});
