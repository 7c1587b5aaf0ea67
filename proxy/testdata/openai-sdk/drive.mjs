// Drives the official OpenAI SDK against the proxy for the proxy's tests
// and cli/proxyauth_test.go: `node drive.mjs SCENARIO` with BASE_URL and
// API_KEY set (and MAX_RETRIES, else the SDK's default) prints one JSON
// object: what the SDK returned or raised, and how long the call took.
import OpenAI from 'openai';
import { report } from '../sdkreport.mjs';

const params = {
  model: 'gpt-4o',
  max_tokens: 100,
  messages: [{ role: 'user', content: 'Say hello' }],
};

const scenario = process.argv[2];
const client = new OpenAI({
  baseURL: process.env.BASE_URL + '/v1',
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
    case 'chat': {
      const c = await client.chat.completions.create(params);
      return { text: c.choices[0].message.content, usage: c.usage };
    }
    case 'headers': {
      const { data: c, response } = await client.chat.completions.create(params).withResponse();
      return { text: c.choices[0].message.content, usage: c.usage, headers: rateLimitHeaders(response.headers) };
    }
    case 'stream': {
      const stream = await client.chat.completions.create({ ...params, stream: true });
      let text = '';
      let finish = null;
      for await (const chunk of stream) {
        for (const ch of chunk.choices) {
          text += ch.delta?.content ?? '';
          finish = ch.finish_reason ?? finish;
        }
      }
      return { text, finishReason: finish };
    }
    case 'untilUnauthorized': {
      // Calls again and again, writing {"ok":true} after each success,
      // until the key is refused: the AuthenticationError is reported.
      const deadline = performance.now() + 30000;
      while (performance.now() < deadline) {
        await client.chat.completions.create(params);
        process.stdout.write(JSON.stringify({ ok: true }) + '\n');
      }
      throw new Error('the key was still served after 30 s');
    }
  }
  throw new Error(`unknown scenario ${scenario}`);
}

report(call, (err) => err instanceof OpenAI.APIError && {
  class: err.constructor.name,
  rateLimit: err instanceof OpenAI.RateLimitError,
  status: err.status,
  code: err.code,
  type: err.type,
  message: err.error?.message,
  retryAfter: err.headers?.get('retry-after') ?? null,
  shouldRetry: err.headers?.get('x-should-retry') ?? null,
});
