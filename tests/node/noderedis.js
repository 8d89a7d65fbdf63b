// node-redis (npm "redis", v5) with its default options against Sluice:
// connect, one decision, a pipeline of three, and the transaction its
// multi() sends by default, which Sluice refuses with the fix in the error.
// Run by tests/clients_test.go with SLUICE_URL set.
const { createClient } = require('redis');

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

  const info = await client.sendCommand(['CLIENT', 'INFO']);
  console.log('lib:', /lib-name=node-redis /.test(info), /resp=2 /.test(info));
  await client.close();
})().catch((err) => { console.error(err); process.exit(1); });
