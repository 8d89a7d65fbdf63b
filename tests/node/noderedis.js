// node-redis (npm "redis") with its default options against Sluice:
// connect, one decision, a pipeline of three, the transaction its multi()
// sends by default, which Sluice refuses with the fix in the error, and a
// refusal read as every doc example reads it (r[0] === 0). Version 6
// says HELLO 3 by default: the decision must still be the array, or
// r[0] would be undefined and the refusal read as an admission.
// Run by tests/clients_test.go with SLUICE_URL set, and NODE_REDIS the
// package to load: redis (v5), redis4 or redis6 (package.json's aliases).
const { createClient } = require(process.env.NODE_REDIS || 'redis');

(async () => {
  const client = createClient({ url: process.env.SLUICE_URL });
  client.on('error', (err) => { console.error('client error:', err); process.exit(1); });
  await client.connect();

  const one = await client.sendCommand(['RL.TOKEN', 'node:1', '20', '10', '1s']);
  console.log('one:', JSON.stringify(one));

  // Commands sent in one tick go out as one pipeline; execAsPipeline is
  // the same without a transaction.
  const costs = ['5', '10', '10'];
  const ticks = await Promise.all(costs.map((c) => client.sendCommand(['RL.TOKEN', 'upload:42', '20', '10', '1s', c])));
  console.log('pipeline:', JSON.stringify(ticks.map((r) => r[0])));
  let batch = client.multi();
  for (const c of costs) batch = batch.addCommand(['RL.TOKEN', 'upload:43', '20', '10', '1s', c]);
  const piped = await batch.execAsPipeline();
  console.log('execAsPipeline:', JSON.stringify(piped.map((r) => r[0])));

  try {
    await client.multi().addCommand(['RL.TOKEN', 'upload:44', '20', '10', '1s']).exec();
    console.log('multi: no error');
  } catch (err) {
    console.log('multi:', err.constructor.name, String(err.message).includes('execAsPipeline'));
  }
  const left = await client.sendCommand(['RL.TOKEN', 'upload:44', '20', '10', '1s', '0']);
  console.log('after multi:', JSON.stringify(left));

  // A refusal, read as the docs read it.
  await client.sendCommand(['RL.FIXED', 'node:refused', '1', '1m']);
  const refused = await client.sendCommand(['RL.FIXED', 'node:refused', '1', '1m']);
  console.log('refused:', refused[0] === 0 ? 'refused' : 'ADMITTED', JSON.stringify(refused.slice(0, 3)));

  // The named fields, asked for: a map under RESP3, name, value pairs
  // under RESP2.
  await client.sendCommand(['RL.REPLY', 'MAP']);
  const named = await client.sendCommand(['RL.TOKEN', 'node:named', '5', '1', '1s']);
  console.log('named:', JSON.stringify(named));

  const info = String(await client.sendCommand(['CLIENT', 'INFO']));
  console.log('lib:', /lib-name=node-redis /.test(info), (info.match(/resp=\d/) || ['?'])[0]);
  await (client.close ? client.close() : client.quit());
})().catch((err) => { console.error(err); process.exit(1); });
